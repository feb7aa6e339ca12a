"""The dashboard's pages; each module renders one view with Streamlit and takes its data from ``app.state``."""
