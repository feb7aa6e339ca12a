"""Page scripts for ``st.navigation``, one line each: import a view from ``app/views/`` and call its ``page()``.

Why shims: the router registers each page as a script file (``st.Page(path)``), so the
file names the page: its address (``/runs``), ``st.switch_page("routes/runs.py")`` and
``AppTest.switch_page``, which takes only files. Streamlit runs a page script top to
bottom on every rerun, so a script cannot be imported without drawing the page; keeping
each script one line leaves the page's code in a view module that imports and tests like
any other.
"""
