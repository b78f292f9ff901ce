"""Who is calling and what they may do: API keys and bearer tokens (JWTs, HS256 or keys from a
JWKS), permissions per group and type, rate limits and throttling (PROTOCOL.md 9.7).

``auth`` decides, ``tokens`` checks a JWT (sans-I/O), ``jwks`` fetches and refreshes the keys.
"""
