"""The framework floor: the smallest Django + DRF view this stack allows, served by daphne as the service is.

It authenticates the same API key with one indexed query (the key's prefix, then its hash compared) and answers a
JSON body of a given size from memory. Against it, a tail poll shows how much of a poll is the service's own work
and how much the framework's (figure 10).
"""
