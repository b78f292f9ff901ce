"""The HTTP/WebSocket gateway of busgate (starlette on uvicorn)."""
