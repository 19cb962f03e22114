"""Integer (INT4 / INT8) quantization of Llama-family checkpoints, numpy only: see tools/quantize_int.py.

  grid.py     scale / zero-point grids, RTN, the QuantizedLinear record
  packing.py  the packers of every format (AWQ, GPTQ, compressed-tensors, AutoRound)
  unpack.py   an independent reader: a written checkpoint back to float32 weights
  model.py    the numpy Llama forward (layer by layer), calibration tokens, perplexity
  gptq.py     GPTQ (Hessian, Cholesky, act-order, static groups)
  awq.py      AWQ (activation-aware scale search, folding, clipping)
"""
