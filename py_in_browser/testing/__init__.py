"""Test tables and workloads shipped with the package so CPython and Pyodide run the same checks."""
