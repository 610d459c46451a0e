# holon in a container: the daemon (`holon serve`) with its home on the /data volume, serving the
# HTTP API on every interface of the container with the token from HOLON_TOKEN (without it the
# daemon refuses to start: off loopback, anyone who reaches the port could control your agents).
#
#   docker build -t holon .                 # --build-arg EXTRAS=local adds the offline model (slow build)
#   docker run -d --init --stop-timeout 30 --name holon -p 127.0.0.1:7878:7878 -v holon-data:/data \
#       -e HOLON_TOKEN="$(openssl rand -hex 32)" holon
#     (--init: a real PID 1 reaps what agents' commands leave behind; --stop-timeout: turns get
#     [daemon] grace_s = 20 s to finish on `docker stop`, Docker's default is 10 s)
#   docker logs holon                       # the daemon's log, JSON lines
#   docker exec holon holon agent list      # the CLI inside, same home
#
# A first start on an empty volume creates the home (`serve --init`). Settings: HOLON_* variables
# (e.g. -e HOLON_MODEL_MODEL=openai/gpt-4o-mini -e OPENAI_API_KEY=...) or /data/holon.toml.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
# Extras of the holon package to install, e.g. "local" (llama-cpp-python, compiled here).
ARG EXTRAS=""
RUN if [ -n "$EXTRAS" ]; then \
        apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
        && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY pyproject.toml README.md ./
COPY holon ./holon
COPY agent_home ./agent_home
COPY config ./config
COPY contrib ./contrib
RUN python -m venv /opt/holon \
    && CMAKE_ARGS="-DGGML_NATIVE=OFF" /opt/holon/bin/pip install --no-cache-dir --disable-pip-version-check \
        "/src${EXTRAS:+[$EXTRAS]}"

FROM python:${PYTHON_VERSION}-slim
ARG EXTRAS=""
# llama.cpp's OpenMP runtime, only with the local model.
RUN if [ -n "$EXTRAS" ]; then \
        apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --create-home --uid 1000 --user-group holon \
    && mkdir /data && chown holon:holon /data
COPY --from=build /opt/holon /opt/holon
ENV PATH=/opt/holon/bin:$PATH
ENV PYTHONUNBUFFERED=1 \
    HOLON_HOME=/data \
    HOLON_API_HOST=0.0.0.0 \
    HOLON_API_PORT=7878 \
    HOLON_API_TOKEN_ENV=HOLON_TOKEN
USER holon
VOLUME /data
EXPOSE 7878
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/v1/health' % os.environ.get('HOLON_API_PORT', '7878'), timeout=4)"
ENTRYPOINT ["holon"]
CMD ["serve", "--init"]
