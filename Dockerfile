# dotformer serve on CPU, for the checkpoint mounted at /model (the CTranslate2 engine, its copy converted on first
# start into the container's cache; mount a volume at /cache to keep it):
#
#   docker build -t dotformer-serve .
#   docker run --rm -p 8080:8080 -v "$PWD/runs/g2p:/model:ro" dotformer-serve
#   docker run --rm -p 8080:8080 -v "$PWD/runs/g2p:/model:ro" -e DOTFORMER_API_KEY=secret dotformer-serve \
#       --batch-wait-ms 10 --dtype int8           # more flags of dotformer serve follow the image's name
#
# GET /health answers while the process runs (the HEALTHCHECK below), GET /ready once the model is loaded.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 DOTFORMER_CACHE_DIR=/cache
WORKDIR /opt/dotformer
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY configs ./configs
COPY src ./src
# torch from its CPU index (no CUDA libraries), at the version constraints.txt pins
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu -c constraints.txt ".[ct2,serve]" \
    && useradd --create-home --uid 1000 dotformer && mkdir /cache && chown dotformer /cache

USER dotformer
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2)"
ENTRYPOINT ["dotformer", "serve", "--checkpoint", "/model", "--host", "0.0.0.0", "--port", "8080"]
