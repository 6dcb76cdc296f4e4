# The gdpfed planning service (uvicorn), SQLite by default.
# Build: docker build -t gdpfed .
# Run:   docker run -p 8000:8000 -v gdpfed-data:/data gdpfed
# The database lives in /data/gdpfed.db (the working directory); set GDPFED_DATABASE_URL
# for PostgreSQL. The first start prints an operator API key once: read it from the logs.
FROM python:3.11-slim

WORKDIR /opt/gdpfed
COPY pyproject.toml README.md ./
COPY accounting ./accounting
COPY planner ./planner
COPY app ./app
COPY trainer ./trainer
COPY bench ./bench
# The service needs no torch: install the package without the trainer extra.
RUN pip install --no-cache-dir .

WORKDIR /data
EXPOSE 8000
CMD ["gdpfed", "serve", "--host", "0.0.0.0", "--port", "8000"]
