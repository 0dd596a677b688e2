"""The py_in_browser dev server and command line."""
