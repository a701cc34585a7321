"""The framework floors: the least this stack (daphne, Django, DRF, channels, on the service's own settings and
database) allows for what a figure measures, with none of the service's own work.

- urls.py: a poll's (figure 10), the smallest DRF view, the same API key found with one indexed query, a JSON body
  of a given size from memory;
- echo.py: a key's echo (figure 2), a channels consumer answering each input frame at once;
- create.py: a create and its first prompt (figure 5), the same three durable writes in the request's thread.
"""
