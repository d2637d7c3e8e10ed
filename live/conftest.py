"""fleetgate supplies this directory's test modules, the live and host checks (fleetgate/plugin/_modules.py)."""
