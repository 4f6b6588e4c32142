"""`python -m autoscaler run --config FILE [--once] [--dry-run] [--log-json]`: the same as `fleet autoscaler`."""

from fleet.cli.daemon import autoscaler_app

if __name__ == "__main__":
    autoscaler_app(prog_name="python -m autoscaler")
