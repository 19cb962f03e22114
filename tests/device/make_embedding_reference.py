# The reference for tests/e2e/server_embeddings.test.mjs (issue 19): pycode-25M's final hidden state
# (after the last RMSNorm) from HF transformers in fp32, pooled over a few Python snippets' token ids
# by the last token and by the mean, each L2-normalized as vLLM's embedding pooler does. Run on the
# GPU machine (which has transformers); the output is committed as tests/data/pycode_embeddings_ref.json.
# usage: python3 make_embedding_reference.py MODEL_DIR OUT.json
import json, sys

import torch
import transformers as tf
from tokenizers import Tokenizer

SNIPPETS = [
    "def parse_args(argv):\n    parser = argparse.ArgumentParser()\n",
    "class Config:\n    def __init__(self, path):\n        self.path = path\n",
    "for i in range(10):\n    print(i)\n",
    "import os",
]


@torch.no_grad()
def main():
    model_dir, out = sys.argv[1], sys.argv[2]
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    ids = [tok.encode(s, add_special_tokens=False).ids for s in SNIPPETS]
    model = tf.AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    last, mean = [], []
    for x in ids:
        h = model(input_ids=torch.tensor([x])).last_hidden_state[0].double()
        last.append(torch.nn.functional.normalize(h[-1], dim=0).tolist())
        mean.append(torch.nn.functional.normalize(h.mean(0), dim=0).tolist())
    json.dump({"model": "pycode-25M", "transformers": tf.__version__, "dtype": "float32",
               "token_ids": ids, "last": last, "mean": mean}, open(out, "w"))
    print(f"wrote {out}: {len(ids)} inputs, hidden {len(last[0])}")


if __name__ == "__main__":
    main()
