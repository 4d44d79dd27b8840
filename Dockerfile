# The retrieval scorer worker image: `scorer worker` by default, any `scorer`
# subcommand otherwise (docker run IMAGE topics create).
FROM python:3.11-slim AS build
# A C compiler for the compiled scoring kernel (setup.py; without it the wheel
# scores in Python, the same numbers, slower).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY scorer ./scorer
COPY schemas ./schemas
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SCORER_WEB_HOST=0.0.0.0 \
    SCORER_WEB_PORT=6066 \
    SCORER_STATE_DIR=/var/lib/scorer
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/scorer scorer
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER scorer
WORKDIR /var/lib/scorer
EXPOSE 6066
# Liveness of the worker's web server; python is in the image, curl is not.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('SCORER_WEB_PORT', '6066') + '/healthz', timeout=2)"]
ENTRYPOINT ["scorer"]
CMD ["worker"]
