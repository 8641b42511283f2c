"""The resource contract: pydantic models of StreamingApp and StreamingSavepoint, names, labels, CRD generation.

Owns: field names, types, defaults and validation of single fields. Never: decisions or I/O.
"""
