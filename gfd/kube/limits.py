"""The time bounds every API call of the kube layer shares: the client's requests and the
exec credential plugins it runs (both bounded alike, so one slow peer never stalls a pass)."""

#: most seconds one request may take, from connecting to the last byte of the answer
REQUEST_TIMEOUT_SECONDS = 10.0
#: shortest timeout a request is given, however little budget is left
MIN_REQUEST_TIMEOUT_SECONDS = 0.1
