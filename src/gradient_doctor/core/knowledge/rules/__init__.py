"""One rule per op family: each turns an `Evidence` into a `Diagnosis`, or declines."""
