"""Calibration: fit the simulator's cost model to a real run (`fit`), keep it as an editable JSON
profile (`profile`), predict a run with it (`predict`) and answer what-if questions (`whatif`)."""
