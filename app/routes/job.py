"""Page script for st.navigation: the job view (see app/views/job.py)."""

from app.views import job

job.page()
