"""The Flight Recorder importer shared by the fr_pickle and fr_json sources: read.py finds and
reads dump files safely, rank.py turns one dump into numpy columns, conventions.py maps FR's
names and conventions onto commtrace's, groups.py rebuilds the process groups, dumps.py puts
them together into a `Trace`."""
