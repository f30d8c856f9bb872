"""Every installed op by name (filled by ember.ops.install): what backward formulas and
composites call, so that they dispatch, record autograd and trace like user code."""
