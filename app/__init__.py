"""stallwatch's dashboard: ``streamlit run app`` from the repository root."""
