import os
import sys

if __name__ == "__main__":  # not when a spawned process (lab reproduce's experiments) imports it as __mp_main__
    # ``python -m`` puts the current folder first on the path: a run, data or reproduction folder the lab is started
    # in must not supply the modules it imports next (``python -P``); the lab itself has been found already
    if sys.path and sys.path[0] and os.path.realpath(sys.path[0]) == os.path.realpath(os.getcwd()):
        del sys.path[0]

from lab.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
