"""Page script for st.navigation: the run view (see app/views/run.py)."""

from app.views import run

run.page()
