"""`mint serve`: one OpenAI-compatible app (``app``) over a backend (``backend``): the local mixture (``local``) or
an upstream multi-LoRA server behind the router (``gateway``, through ``upstream``'s client); ``protocol`` holds
the request checks and answer shapes both share, ``server`` binds and runs it, ``replay`` drives it as clients
would (the loop's serve step)."""
