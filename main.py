"""The original tool's interface: `python main.py --config-file config.ini`."""

import argparse
import sys

from perf4sight.cli import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run a perf4sight config file.")
    parser.add_argument("--config-file", required=True, help="config.ini to execute")
    args = parser.parse_args()
    sys.exit(main(["run", "--config", args.config_file]))
