"""Page scripts that ``st.navigation`` runs; each only calls one view."""
