"""Protobuf messages: GraphDef, NodeDef, AttrValue, TensorProto, TensorShapeProto, DataType and VersionDef
with TensorFlow's field numbers (so TensorFlow reads our bytes), and tfplus's checkpoint format.

The *_pb2.py modules are generated and committed; after editing a .proto run `python tools/gen_protos.py`
(tests/core/test_proto.py checks that the committed modules match a fresh protoc run byte for byte).
"""
