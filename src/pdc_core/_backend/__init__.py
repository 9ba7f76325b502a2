"""The device stack's contract layer: backend ABCs, the ring protocol, the persistent-kernel
spec, resident kernels and host-worker machinery. Knows no actor and no plugin; its
public face is :mod:`pdc_core.backend`."""
