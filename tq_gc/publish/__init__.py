"""What publishers import: the admission registry, GcClient and its checkpoint fence, the manifest
writer. Light on purpose: no Ray, no TransferQueue, no pydantic config."""
