;; TEMPO fixture: a small hand-written ALFWorld problem (one kitchen, four receptacles).
;; Task: put a clean apple in fridge (pick_clean_then_place_in_recep).
(define (problem tempo_fixture_clean_apple_fridge)
    (:domain alfred)
    (:objects
        agent1 - agent
        AppleType - otype
        MugType - otype
        KnifeType - otype
        ButterKnifeType - otype
        CounterTopType - rtype
        FridgeType - rtype
        SinkBasinType - rtype
        MicrowaveType - rtype
        Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20 - object
        Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35 - object
        CounterTop_bar__minus_01_dot_80_bar__plus_00_dot_90_bar__plus_00_dot_25 - receptacle
        Fridge_bar__plus_01_dot_50_bar__plus_00_dot_00_bar__minus_01_dot_00 - receptacle
        Sink_bar__minus_01_dot_90_bar__plus_00_dot_90_bar__minus_01_dot_60_bar_SinkBasin - receptacle
        Microwave_bar__minus_01_dot_85_bar__plus_01_dot_50_bar__plus_01_dot_40 - receptacle
        loc_bar_0_bar_0_bar_0_bar_30 - location
        loc_bar__minus_4_bar_1_bar_3_bar_45 - location
        loc_bar_4_bar__minus_4_bar_1_bar_60 - location
        loc_bar__minus_4_bar__minus_6_bar_3_bar_60 - location
        loc_bar__minus_4_bar_6_bar_3_bar_15 - location
    )
    (:init
        (atLocation agent1 loc_bar_0_bar_0_bar_0_bar_30)
        (receptacleAtLocation CounterTop_bar__minus_01_dot_80_bar__plus_00_dot_90_bar__plus_00_dot_25 loc_bar__minus_4_bar_1_bar_3_bar_45)
        (receptacleAtLocation Fridge_bar__plus_01_dot_50_bar__plus_00_dot_00_bar__minus_01_dot_00 loc_bar_4_bar__minus_4_bar_1_bar_60)
        (receptacleAtLocation Sink_bar__minus_01_dot_90_bar__plus_00_dot_90_bar__minus_01_dot_60_bar_SinkBasin loc_bar__minus_4_bar__minus_6_bar_3_bar_60)
        (receptacleAtLocation Microwave_bar__minus_01_dot_85_bar__plus_01_dot_50_bar__plus_01_dot_40 loc_bar__minus_4_bar_6_bar_3_bar_15)
        (receptacleType CounterTop_bar__minus_01_dot_80_bar__plus_00_dot_90_bar__plus_00_dot_25 CounterTopType)
        (receptacleType Fridge_bar__plus_01_dot_50_bar__plus_00_dot_00_bar__minus_01_dot_00 FridgeType)
        (receptacleType Sink_bar__minus_01_dot_90_bar__plus_00_dot_90_bar__minus_01_dot_60_bar_SinkBasin SinkBasinType)
        (receptacleType Microwave_bar__minus_01_dot_85_bar__plus_01_dot_50_bar__plus_01_dot_40 MicrowaveType)
        (openable Fridge_bar__plus_01_dot_50_bar__plus_00_dot_00_bar__minus_01_dot_00)
        (openable Microwave_bar__minus_01_dot_85_bar__plus_01_dot_50_bar__plus_01_dot_40)
        (objectType Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20 AppleType)
        (objectType Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35 MugType)
        (objectAtLocation Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20 loc_bar__minus_4_bar_1_bar_3_bar_45)
        (objectAtLocation Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35 loc_bar__minus_4_bar_1_bar_3_bar_45)
        (inReceptacle Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20 CounterTop_bar__minus_01_dot_80_bar__plus_00_dot_90_bar__plus_00_dot_25)
        (inReceptacle Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35 CounterTop_bar__minus_01_dot_80_bar__plus_00_dot_90_bar__plus_00_dot_25)
        (pickupable Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20)
        (pickupable Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35)
        (cleanable Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20)
        (heatable Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20)
        (coolable Apple_bar__minus_01_dot_50_bar__plus_00_dot_95_bar__plus_00_dot_20)
        (cleanable Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35)
        (heatable Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35)
        (coolable Mug_bar__minus_01_dot_20_bar__plus_00_dot_95_bar__plus_00_dot_35)
        (canContain CounterTopType AppleType)
        (canContain CounterTopType MugType)
        (canContain FridgeType AppleType)
        (canContain FridgeType MugType)
        (canContain SinkBasinType AppleType)
        (canContain SinkBasinType MugType)
        (canContain MicrowaveType AppleType)
        (canContain MicrowaveType MugType)
    )
    (:goal
        (and
            (exists (?r - receptacle)
                (exists (?o - object)
                    (and
                        (cleanable ?o)
                        (objectType ?o AppleType)
                        (receptacleType ?r FridgeType)
                        (isClean ?o)
                        (inReceptacle ?o ?r)
                    )
                )
            )
        )
    )
)
