"""The gateway's server process: settings (file, environment, flags), ``busgate gateway`` and its
worker processes, the app under uvicorn until it drains (PROTOCOL.md 9.1), uvicorn's HTTP/1.1
protocol with a header deadline and the response cycle the streams write on, the files the
install serves, and the metrics (9.6).
"""
