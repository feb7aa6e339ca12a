"""Page script for st.navigation: the compare view (see app/views/compare.py)."""

from app.views import compare

compare.page()
