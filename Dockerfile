# busgate: one image for every process of docker-compose.yml (broker, gateways, demo, report).
# Build: docker build -t busgate .      Run all-in-one: docker run -p 8080:8080 busgate
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BUSGATE_WEB_DIR=/app/web

# Java for the Spark report job (pipeline extra); nothing else needs system packages.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bus ./bus
COPY gateway ./gateway
COPY pipeline ./pipeline
COPY web ./web
COPY openapi ./openapi
RUN pip install ".[pipeline]"

# Run unprivileged; /data holds the journal and the reports (a volume in docker-compose.yml).
RUN useradd --system --uid 10001 --home-dir /app busgate \
    && mkdir -p /data \
    && chown busgate /data
USER busgate

# 4000 bus (wire frames), 7890 Object System, 8080 HTTP gateway.
EXPOSE 4000 7890 8080
CMD ["busgate", "run"]
