"""The original tool's interface: `python main.py --config-file config.ini`."""

import argparse
import sys

from perf4sight.cli import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run a perf4sight config file.")
    parser.add_argument("--config-file", required=True, help="config.ini to execute")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars or info lines")
    args = parser.parse_args()
    sys.exit(main([*(["--quiet"] if args.quiet else []), "run", "--config", args.config_file]))
