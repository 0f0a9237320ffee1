"""The API's request and response models, one module per resource (never the protobuf classes or state records).

Response models end in `Out`, request models in `Request`; both derive from the bases of `common`.
"""
