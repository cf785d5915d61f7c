import sys

from lab.cli import main

if __name__ == "__main__":  # not when a spawned process (lab reproduce's experiments) imports it as __mp_main__
    sys.exit(main())
