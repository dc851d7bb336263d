# The project's Airflow image: the official base plus requirements.txt (the same pins as .venv).
FROM apache/airflow:3.3.2-python3.11
COPY requirements.txt constraints.txt /opt/bench/
RUN pip install --no-cache-dir -r /opt/bench/requirements.txt -c /opt/bench/constraints.txt
COPY requirements-nodeps.txt /opt/bench/
RUN pip install --no-cache-dir --no-deps -r /opt/bench/requirements-nodeps.txt
COPY pyproject.toml /opt/bench/
COPY plugins /opt/bench/plugins
RUN pip install --no-cache-dir --no-deps -e /opt/bench
