"""The web dashboard: terminals (list, live xterm.js view), the audit trail and API keys, for logged-in users.

Pages are Django templates with a little plain JavaScript (no build step, no CDN); every action goes through the
core's use cases with the same access rule, audit rows and throttles as the API.
"""
