"""The dashboard's pages, one module each with ``page()``; app/routes/ runs them and app/components/ holds their parts.

Not named ``pages/``: a folder of that name beside the entry script switches Streamlit to its
legacy multipage mode, which makes every file in it a page of a second navigation wrapped
around the router's.
"""
