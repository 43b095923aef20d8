"""Networks (torch, no file I/O): fixed and slimmable MobileNet-v1, the sandwich step, sub-network scoring, ONNX graphs."""
