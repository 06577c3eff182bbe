# Source this on a GPU machine that has no package manager access: unpacks the Debian runtime
# packages carried in .deb/ (libmicrohttpd, jansson, Criterion and its libraries, wrk) into /tmp/r
# and points the loader and PATH at them. `make device-debs` fills .deb/ on a Debian machine.
mkdir -p /tmp/r
for f in .deb/*.deb; do dpkg -x "$f" /tmp/r; done
export LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/tmp/r/usr/bin:$PATH
