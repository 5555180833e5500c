"""`bertexp benchmark-serving`: latency and throughput of exports, in process and through servers."""
