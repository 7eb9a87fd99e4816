"""What a traced graph or a SavedModel runs: op types, XLA-marked functions; no kernel overrides."""


def graph_ops(concrete):
    """The op types of a concrete function's graph and of every function it calls."""
    ops = [op.type for op in concrete.graph.get_operations()]
    for function in concrete.graph._functions.values():
        ops += [node.op for node in function.definition.node_def]
    return ops


def xla_compiled_functions(path):
    """Names of functions / call nodes in a SavedModel marked for XLA compilation."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((path / "saved_model.pb").read_bytes() if hasattr(path, "read_bytes")
                          else open(f"{path}/saved_model.pb", "rb").read())
    marked = []
    for meta_graph in proto.meta_graphs:
        library = meta_graph.graph_def.library
        for function in library.function:
            if function.attr["_XlaMustCompile"].b:
                marked.append(function.signature.name)
            marked += [n.name for n in function.node_def if n.attr["_XlaMustCompile"].b]
        marked += [n.name for n in meta_graph.graph_def.node if n.attr["_XlaMustCompile"].b]
    return marked


def clear_kernel_overrides(monkeypatch):
    """Unsets, for the test, every environment variable that overrides the kernel policy."""
    from keras_sentemb.kernels import policy as kernels

    for name in kernels.ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
