"""Page script for st.navigation: the sweeps view (see app/views/sweeps.py)."""

from app.views import sweeps

sweeps.page()
