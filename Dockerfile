# satbench: one image for the simulator, exporter, recommender and load generator (`satbench <command>`).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/satbench
COPY pyproject.toml README.md ./
COPY satbench ./satbench
RUN pip install --no-compile . && useradd --system --uid 10001 satbench
COPY prometheus ./prometheus
COPY grafana ./grafana
USER satbench
ENTRYPOINT ["satbench"]
CMD ["--help"]
