"""Model interop: the TensorFlow.js Layers format (tfjs, both ways) and ONNX (onnx_export, out only).

Both convert the engine's model file (model_file.py), as bytes, so they need no tensors and run
the same in CPython and Pyodide. onnx_export imports the onnx package, which Pyodide lacks: only
the CLI and tests import it, never the engine.
"""
