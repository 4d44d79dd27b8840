"""The streaming scorer: a Faust worker that scores retrieval results against their
qrels as they arrive (``app.create_app``); ``faust_edge`` holds what it changes in
Faust, ``testing`` runs its handlers without a broker."""
