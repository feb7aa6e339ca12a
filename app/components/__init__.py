"""Parts of pages: the sidebar, the empty-file welcome, the report panel, the downloads; none is a page itself."""
