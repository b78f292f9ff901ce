# busgate: one image for every process of docker-compose.yml (broker, gateways, demo, report).
# Build: docker build -t busgate .      Run all-in-one: docker run busgate   (see README, Docker)
#
# The image installs what tests/test_package.py installs: the wheel `python -m build` makes (from
# the sdist it makes first), here with the pipeline extra. Debian bookworm: it has Java 17.

# --- build: the sdist and the wheel, with the C accelerators compiled ----------------------------
FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
# The whole context (.dockerignore drops caches and build output): the same sdist as a checkout's.
COPY . /src
WORKDIR /src
RUN pip install --no-cache-dir --disable-pip-version-check "build>=1.2" \
    && python -m build --outdir /dist . \
    && python -c "import sys, zipfile; names = zipfile.ZipFile(sys.argv[1]).namelist(); \
assert [n for n in names if n.startswith('bus/native/_speedups.')  and n.endswith('.so')], names; \
assert [n for n in names if n.startswith('bus/native/_journalscan.') and n.endswith('.so')], names" \
       /dist/busgate-*.whl

# --- the image ---------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java for the Spark report job (pipeline extra); nothing else needs system packages.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

COPY --from=build /dist /tmp/dist
RUN pip install "$(ls /tmp/dist/busgate-*.whl)[pipeline]" && rm -rf /tmp/dist

# Run unprivileged; /data holds the journal and the reports (a volume in docker-compose.yml).
RUN useradd --system --uid 10001 --home-dir /data busgate \
    && mkdir -p /data \
    && chown busgate /data
USER busgate
WORKDIR /data

# 4000 bus (wire frames), 7890 Object System, 8080 HTTP gateway.
EXPOSE 4000 7890 8080
CMD ["busgate", "run"]
