"""JupyterLab's login for Open OnDemand's "Connect" button: the session's token is posted, never
put in a URL (where access logs, proxies and the browser's history would keep it).

Open OnDemand's session card (view.html.erb) is a page of Open OnDemand's, which cannot hold
JupyterLab's `_xsrf` value; jupyter_server's login form refuses a POST without it. This handler
takes the login POST without `_xsrf`, if it comes from this server's own site (Origin checked):
a forged post could log a browser in only with this session's token, which the forger would
need to know. Every other POST keeps jupyter_server's cross-site checks.
"""

from __future__ import annotations

from jupyter_server.auth.login import LoginFormHandler
from tornado import web


class PostedTokenLogin(LoginFormHandler):
    """jupyter_server's login form; its POST (field `password`: the token) needs no `_xsrf`."""

    def check_xsrf_cookie(self) -> None:
        if self.request.method != "POST" or not hasattr(self, "_jupyter_current_user"):
            return super().check_xsrf_cookie()  # (called again by prepare once the user is known)
        if not self.request.headers.get("Origin") or not self.check_origin():
            raise web.HTTPError(403, "a login must be posted from this server's own site")
        return None
