"""The user API (`environment`: StreamEnvironment, DataStream) and the `barrierflow` command line
(`cli`). The names users import are re-exported by the `runtime` package.
"""
