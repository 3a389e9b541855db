"""How an experiment runs and is reported: run config, runner, evaluation, tracking, compare, the sweep, document
collections, the demo and the command line."""
