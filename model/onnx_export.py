"""A sentence encoder as an ONNX graph: token ids (B, T) and lengths (B,) in, the embedding (B, D) out.

    graph = encoder_graph(model.encoders["shared"])          # an onnx.ModelProto, fp32
    onnx.save(graph, "encoder.onnx"); quantize_int8("encoder.onnx", "encoder.int8.onnx")

The graph is written op by op rather than traced: tracing `SentenceEncoder.forward`
would unroll its LSTM over the traced length and turn the per-sentence reversal
of the backward direction into gathers. ONNX's own LSTM op takes `sequence_lens`
and runs the backward direction from each sentence's last real token, which is
exactly what the PyTorch encoder computes on right-padded input; ONNX Runtime
has a fused kernel for it, and an int8 one (DynamicQuantizeLSTM) that
`quantize_dynamic` substitutes. Both axes, batch and length, are dynamic.
Sentencepiece stays outside: the graph sees token ids, EOS included, as
`model.batching.pad` makes them.
"""

from __future__ import annotations

import numpy as np
import torch

from model.encoder import SentenceEncoder

OPSET = 17  # ReduceMax still takes its axes as an attribute; ONNX Runtime >= 1.12 runs it
INPUTS = ("ids", "lengths")  # ids (B, T) int64, right-padded; lengths (B,) int64, all >= 1
OUTPUT = "embedding"  # (B, D) float32
# PyTorch orders an LSTM's gates input, forget, cell, output; ONNX input, output, forget, cell
_GATES = (0, 3, 1, 2)


def encoder_graph(encoder: SentenceEncoder, *, name: str = "encoder"):
    """The ONNX model (fp32) of `encoder` in eval mode. Raises ValueError for an encoder it cannot express."""
    import onnx
    from onnx import TensorProto, helper

    nodes, weights = [], [_tensor("embed_weight", encoder.embed.weight)]
    nodes.append(helper.make_node("Gather", ["embed_weight", "ids"], ["x_btf"]))  # (B, T, E)
    nodes.append(helper.make_node("Transpose", ["x_btf"], ["x0"], perm=[1, 0, 2]))  # (T, B, E)
    nodes += _mask_nodes()  # mask (T, B, 1), lengths32 (B,)
    if encoder.lstm is None:
        pooled = _mean_nodes(nodes)
    else:
        top = _lstm_nodes(encoder.lstm, nodes, weights)  # (T, B, D)
        pooled = _last_nodes(nodes, top) if encoder.pooling == "last" else _max_nodes(nodes, top)
    nodes.append(helper.make_node("Identity", [pooled], [OUTPUT]))
    graph = helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("lengths", TensorProto.INT64, ["batch"]),
        ],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", encoder.output_dim])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="interlingua")
    onnx.checker.check_model(model)
    return model


def _tensor(name: str, value: torch.Tensor | np.ndarray):
    from onnx import numpy_helper

    array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
    return numpy_helper.from_array(np.ascontiguousarray(array, dtype=array.dtype), name)


def _const(name: str, value) -> object:
    from onnx import helper

    return helper.make_node("Constant", [], [name], value=_tensor(f"{name}_value", np.asarray(value)))


def _mask_nodes() -> list:
    """mask (T, B, 1) bool: position t is a real token of sentence b; lengths32 (B,) for the LSTM."""
    from onnx import TensorProto, helper

    return [
        helper.make_node("Shape", ["x0"], ["shape_tbf"]),
        _const("zero", np.array(0, np.int64)),
        _const("one", np.array(1, np.int64)),
        helper.make_node("Gather", ["shape_tbf", "zero"], ["steps"], axis=0),  # () T
        helper.make_node("Range", ["zero", "steps", "one"], ["positions"]),  # (T,)
        _const("axis_1", np.array([1], np.int64)),
        _const("axis_0", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", ["positions", "axis_1"], ["positions_t1"]),  # (T, 1)
        helper.make_node("Unsqueeze", ["lengths", "axis_0"], ["lengths_1b"]),  # (1, B)
        helper.make_node("Less", ["positions_t1", "lengths_1b"], ["mask_tb"]),  # (T, B)
        _const("axis_2", np.array([2], np.int64)),
        helper.make_node("Unsqueeze", ["mask_tb", "axis_2"], ["mask"]),  # (T, B, 1)
        helper.make_node("Cast", ["lengths"], ["lengths32"], to=TensorProto.INT32),
    ]


def _lstm_nodes(lstm: torch.nn.LSTM, nodes: list, weights: list) -> str:
    """One ONNX LSTM per layer, its output (T, num_dir, B, H) reshaped to (T, B, num_dir * H); the top's name."""
    from onnx import helper

    if lstm.proj_size:
        raise ValueError("an LSTM with proj_size has no ONNX export here")
    directions = ["", "_reverse"] if lstm.bidirectional else [""]
    nodes.append(_const("tb_flat", np.array([0, 0, -1], np.int64)))
    x = "x0"
    for layer in range(lstm.num_layers):
        w, r, b = [], [], []
        for suffix in directions:
            w.append(_reorder(getattr(lstm, f"weight_ih_l{layer}{suffix}")))  # (4H, in)
            r.append(_reorder(getattr(lstm, f"weight_hh_l{layer}{suffix}")))  # (4H, H)
            b.append(
                np.concatenate(
                    [
                        _reorder(getattr(lstm, f"bias_ih_l{layer}{suffix}")),
                        _reorder(getattr(lstm, f"bias_hh_l{layer}{suffix}")),
                    ]
                )
            )  # (8H,)
        names = [f"lstm{layer}_{k}" for k in "WRB"]
        weights += [_tensor(n, np.stack(v)) for n, v in zip(names, (w, r, b))]
        y = f"lstm{layer}_y"
        nodes.append(
            helper.make_node(
                "LSTM",
                [x, *names, "lengths32"],
                [y],
                hidden_size=lstm.hidden_size,
                direction="bidirectional" if lstm.bidirectional else "forward",
                layout=0,
            )
        )  # Y (T, D, B, H)
        nodes.append(helper.make_node("Transpose", [y], [f"{y}_tbdh"], perm=[0, 2, 1, 3]))  # (T, B, D, H)
        x = f"lstm{layer}_out"
        nodes.append(helper.make_node("Reshape", [f"{y}_tbdh", "tb_flat"], [x]))  # (T, B, D * H)
    return x


def _reorder(param: torch.Tensor) -> np.ndarray:
    """PyTorch's gate blocks (i, f, g, o) along the first axis in ONNX's order (i, o, f, c)."""
    blocks = param.detach().cpu().numpy().astype(np.float32).reshape(4, -1, *param.shape[1:])
    return np.concatenate([blocks[g] for g in _GATES])


def _max_nodes(nodes: list, top: str) -> str:
    """Max over the real time steps: padding set to -inf first (ORT zeroes it, and 0 may beat a real max)."""
    from onnx import helper

    nodes.append(_const("minus_inf", np.array(-np.inf, np.float32)))
    nodes.append(helper.make_node("Where", ["mask", top, "minus_inf"], ["masked"]))  # (T, B, D)
    nodes.append(helper.make_node("ReduceMax", ["masked"], ["pooled"], axes=[0], keepdims=0))  # (B, D)
    return "pooled"


def _last_nodes(nodes: list, top: str) -> str:
    """The top layer's state at each sentence's last real token: (T, B, H) -> (B, H)."""
    from onnx import helper

    nodes += [
        _const("zero_f", np.array(0.0, np.float32)),
        helper.make_node("Where", ["mask", top, "zero_f"], ["masked"]),  # (T, B, H)
        helper.make_node("Sub", ["lengths", "one"], ["last_index"]),  # (B,)
        helper.make_node("Unsqueeze", ["last_index", "axis_0"], ["last_1b"]),  # (1, B)
        helper.make_node("Unsqueeze", ["last_1b", "axis_2"], ["last_1b1"]),  # (1, B, 1)
        helper.make_node("Shape", ["masked"], ["shape_m"]),
        _const("slice_end", np.array([3], np.int64)),
        helper.make_node("Slice", ["shape_m", "axis_1", "slice_end"], ["shape_bh"]),  # [B, H]
        helper.make_node("Concat", ["axis_1", "shape_bh"], ["shape_1bh"], axis=0),  # [1, B, H]
        helper.make_node("Expand", ["last_1b1", "shape_1bh"], ["last_1bh"]),  # (1, B, H)
        helper.make_node("GatherElements", ["masked", "last_1bh"], ["last_state"], axis=0),  # (1, B, H)
        helper.make_node("Squeeze", ["last_state", "axis_0"], ["pooled"]),  # (B, H)
    ]
    return "pooled"


def _mean_nodes(nodes: list) -> str:
    """The bag of subwords: the mean of the real tokens' embeddings, (T, B, E) -> (B, E)."""
    from onnx import TensorProto, helper

    nodes.append(helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT))  # (T, B, 1)
    nodes.append(helper.make_node("Mul", ["x0", "mask_f"], ["x_real"]))
    nodes.append(helper.make_node("ReduceSum", ["x_real", "axis_0"], ["x_sum"], keepdims=0))  # (B, E)
    nodes.append(helper.make_node("Cast", ["lengths"], ["lengths_f"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Unsqueeze", ["lengths_f", "axis_1"], ["lengths_b1"]))  # (B, 1)
    nodes.append(helper.make_node("Div", ["x_sum", "lengths_b1"], ["pooled"]))
    return "pooled"


def quantize_int8(fp32_path: str, int8_path: str) -> list[str]:
    """Dynamic int8 quantization of an `encoder_graph` file (weights int8, activations quantized per
    batch): the LSTM becomes DynamicQuantizeLSTM, the embedding table stays fp32 (a Gather is a lookup,
    not a product: int8 would only cost precision). The op types quantized."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(fp32_path, int8_path, op_types_to_quantize=["LSTM", "MatMul"], weight_type=QuantType.QInt8)
    return sorted({node.op_type for node in onnx.load(int8_path).graph.node if "Quant" in node.op_type})
