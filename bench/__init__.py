"""Benchmarks of py_in_browser side by side with TensorFlow.js in one Chromium session."""
