"""Parts of pages: the sidebar, the empty-file welcome, the diagnosis findings, the downloads; none is a page itself."""
