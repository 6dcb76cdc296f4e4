"""The service layer: the work behind each route (validate, compute, store), without HTTP."""
