"""Views: snapshot arrays → HoloViews elements. Pure functions; no Panel state, no training."""
