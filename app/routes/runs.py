"""Page script for st.navigation: the runs view (see app/views/runs.py)."""

from app.views import runs

runs.page()
